"""Natural text: corpora with their splits, tokenizers, the token-id cache, twins planted in
token ids, the masking rule of a masked LM on text, and the text Task that serves batches to the
trainer (no ground truth, except the planted twins' relations)."""
