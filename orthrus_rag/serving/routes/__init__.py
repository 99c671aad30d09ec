"""The HTTP routes, one file per API family."""
