"""Attention: the scaled dot-product core, multi-head and grouped-query layers, masks and the attention settings."""
