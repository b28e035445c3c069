"""What people read: terminal and Markdown tables, figures, report.html, the files a run writes."""
