"""cloudopt: find the cheapest or fastest way to run a deep-learning training job within its SLA."""

__version__ = "0.1.0"

__cloudopt_package__ = True  # checked, without importing, by optimizer.install_check
