"""One module per database, holding only what differs between them."""
