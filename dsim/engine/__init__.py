"""The serving engine: a simpy replica with continuous batching and speculative decoding."""
