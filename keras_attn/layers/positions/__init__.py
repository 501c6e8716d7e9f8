"""Position schemes: sinusoidal, learned, rotary, ALiBi and relative position bias."""
