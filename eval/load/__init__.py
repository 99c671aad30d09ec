"""Load generation: when requests arrive (arrivals.py), and the HTTP load test of a running server (http_load.py)."""
