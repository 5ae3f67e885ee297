"""fairseq datasets of the plugin's tasks and the preprocessing of real data:
parsing (:mod:`.parse`, :mod:`.parsers`), tree files (:mod:`.tree_files`,
:mod:`.preprocess`), the worker processes of both (:mod:`.workers`), batches
with trees (:mod:`.tree_dataset`), tagging and classification data."""
