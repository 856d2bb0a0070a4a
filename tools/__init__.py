"""Tools that build what the package ships (the trained tiny pair); not installed with it."""
