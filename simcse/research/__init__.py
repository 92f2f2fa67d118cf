"""The paper's analyses as tools: ablations, the raw-encoder reproduction, whitening, plots, FLOPs, and the prepared
GPU check."""
