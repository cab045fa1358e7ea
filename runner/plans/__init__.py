"""Plans: a recipe and its inputs, executed durably, step by step, resumable after any crash."""
