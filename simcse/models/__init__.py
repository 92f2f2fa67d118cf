"""The SimCSE model: encoder + pooler module, its saved-folder format and its inference loop."""
