"""python."""
