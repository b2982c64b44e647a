"""Who leads: the advisory-lock elector, fencing terms and membership."""
