"""The surgeon catalogue (Olive's GraphSurgeries names): importing this package registers every surgeon.

Each module holds one family; add a module here when a new family is added.
"""
