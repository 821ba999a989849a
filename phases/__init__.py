"""cloudopt.phases"""
