"""What a bug report holds: the issue's facts, the table of changes, the reproducer script and zip, the newest release."""
