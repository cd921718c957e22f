"""Reconstruction: a session's recorded calls rebuilt into token-faithful trajectories.

``calls`` resolves delta-encoded prompts, ``strategies`` turns ordered calls into segments,
``checker`` verifies the faithfulness invariant; the service runs them over the events topic.
"""
