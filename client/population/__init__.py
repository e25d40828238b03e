"""Who the simulated users are: data laws (`distributions`), population specs (`spec`), their
construction (`build`), features and labeled tasks (`features`, `learning`) and real data sets
(`datasets`)."""
