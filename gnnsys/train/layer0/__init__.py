"""Layer 0 without remote float rows: the partial-sum plan, owner sums, fused dequantization."""
