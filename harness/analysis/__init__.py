"""From a Run to decisions: statistics, comparisons, proof, parity, gates, break-even, forecasts."""
