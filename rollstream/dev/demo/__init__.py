"""``rollstream demo``: the whole loop on this machine, from tasks to a trained policy version."""
