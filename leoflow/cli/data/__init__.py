"""Commands about data arriving (``leoflow datasets``): a sub-package, as ``cli/`` holds its 20 modules."""
