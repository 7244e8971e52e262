"""Pure log parsers, one module per inference server: text in, records out, no I/O and no clock."""
