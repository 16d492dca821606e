"""The admin API (`/admin/*`): fleet CRUD, the live fleet, the request log, client keys."""
