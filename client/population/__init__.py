"""Who the simulated users are: data laws (`distributions`), population specs (`spec`; their flags
and files in `flags`, CSV populations in `table`), their construction (`build`), features and
labeled tasks (`features`, `learning`) and real data sets (`datasets`)."""
