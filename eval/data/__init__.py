"""Scripts that build the project's data files from official releases."""
