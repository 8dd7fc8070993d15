"""Hardware load profiles: reading, interpolating, roofline estimates and measurement."""
