"""cloudopt.envs"""
