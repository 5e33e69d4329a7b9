"""(placeholder: documented in the next commit)"""
