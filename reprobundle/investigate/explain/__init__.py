"""`explain`: the experiments (changed defaults, passes, flags) that bring the last good release's behaviour back."""
