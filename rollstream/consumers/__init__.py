"""What reads the stream.

Reconstruction strategies and service, scorer, trainer client, replay and export (issues 5, 7).
"""
