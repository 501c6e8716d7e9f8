"""Encoder and decoder blocks and the feed-forward parts they are made of."""
