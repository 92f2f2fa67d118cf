"""``simcse serve``: the search service, its web app and the entry point."""
