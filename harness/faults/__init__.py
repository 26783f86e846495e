"""Fault values (schedule.py), their validation (validate.py) and, from the runner side, their backends."""
