"""The dashboard page's files (HTML, JavaScript, CSS), served by app/api/routes/ui.py."""
