"""Turns events into passages in every store: chunk, embed, write, invalidate, audit."""
