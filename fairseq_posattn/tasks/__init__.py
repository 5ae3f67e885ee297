"""fairseq tasks of the plugin; importing this package registers them with fairseq."""
