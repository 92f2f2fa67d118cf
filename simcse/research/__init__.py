"""Research tools that run whole experiments on top of the library (the prepared GPU check)."""
