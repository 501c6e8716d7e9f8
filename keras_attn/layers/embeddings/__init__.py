"""Token and position embeddings, and the class token."""
