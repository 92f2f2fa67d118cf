"""Training: arguments, configs, data, collators, samplers, the InfoNCE loss and the Trainer."""
