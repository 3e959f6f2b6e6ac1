//! Corefile syntax: lexer, parser, imports, snippets, server keys. No plugin knowledge.
