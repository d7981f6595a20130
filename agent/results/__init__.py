"""The results tree: the portable record every stage after collect reads."""
