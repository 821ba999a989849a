"""The stages after the closed loop, one module each."""
