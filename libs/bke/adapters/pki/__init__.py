"""The PKI's stores: a directory (`store_dir`, offline `bke certs`), Redis (`store_redis`, the
certs service) and the API credentials kept in Redis (`api_credentials`). The PKI itself (the
table, issuance, `ensure`, the `PkiStore` protocol) is bke.core.pki."""
