"""Storage: models, engines, migrations and every SQL statement Leoflow runs."""
