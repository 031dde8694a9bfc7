"""The building blocks the models share: attention implementations, the packed layout, oneDNN Linear modules."""
