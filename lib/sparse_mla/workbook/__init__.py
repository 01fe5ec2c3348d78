"""The workbook itself: :mod:`.chain` runs the numbered notebooks headless with papermill (``sparse-mla run``),
:mod:`.summary` collects the headline results each notebook reports into ``results/<profile>/summary.{md,json}``."""
