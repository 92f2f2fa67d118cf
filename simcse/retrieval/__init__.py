"""The ``SimCSE`` tool (the reference's facade), indexes, encoded shards and the sentence store."""
