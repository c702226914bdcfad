"""Peer implementations that the benchmarks compare fedopt with, written the way research code usually is."""
