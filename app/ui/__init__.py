"""The dashboard page's files (HTML, JavaScript, CSS), served by app/routes/ui.py."""
