"""The upgrader's composition, in parts app.py puts together."""
