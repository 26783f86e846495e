"""Fault values (schedule.py) and, from the runner side, their backends."""
