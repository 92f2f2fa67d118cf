"""Input readers (text, CSV/TSV/JSONL, undecodable lines), safe writes and downloads: the ground floor."""
