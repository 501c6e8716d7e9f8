"""Output heads: vocabulary projections and sequence pooling."""
