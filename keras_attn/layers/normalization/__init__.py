"""Layer normalization and RMS normalization."""
