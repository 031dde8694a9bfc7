"""Reading and writing files: streaming text readers, atomic vector writers, the resume journal, Ray Data."""
