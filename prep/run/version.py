"""The version prep writes into every manifest it makes."""

__version__ = "0.1.0"
