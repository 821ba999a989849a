"""cloudopt.agents"""
