"""Answers questions from permitted evidence only: filter, rank, fuse, loop, check, abstain."""
